"""What a person sees beside the terminal: dbsurge's panel in Locust's web UI and its endpoints, the Prometheus endpoint."""
