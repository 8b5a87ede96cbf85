"""Load tests: the locust mix (locustfile.py) and the soak harness (soak/), see loadtest/README.md."""
