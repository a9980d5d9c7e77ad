"""One recipe per subset; each turns source rows into candidate Items (design.md s3)."""
