"""Side-by-side benchmark of the service against its HTTP and database ceilings (`python -m bench`)."""
