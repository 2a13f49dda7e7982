"""REST resources, one package per resource (flask-smorest blueprints)."""
