"""What the tests share that is not a test: fixtures, the real-process deployment, Redis servers and proxies."""
