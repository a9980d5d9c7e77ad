"""One recipe per subset; each turns source rows into candidate Items (docs/data.md)."""
