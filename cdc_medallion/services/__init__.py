"""Services the pipeline talks to, started locally from their Maven Central jars (no Docker):
for tests, and for users who want to see the pipeline read a real broker."""
