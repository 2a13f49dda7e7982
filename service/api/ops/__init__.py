"""Operations: health, readiness and the Prometheus exposition."""
