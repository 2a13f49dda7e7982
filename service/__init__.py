"""REST API (flask-smorest), Swagger UI and Grafana datasource over the Redis rollups."""
