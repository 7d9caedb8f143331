"""HTTP routes: thin handlers over service.scoring and service.inference."""
