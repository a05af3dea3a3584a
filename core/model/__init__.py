"""The model: its client, what its server serves (discovery, profiles, probes), token
estimates and their calibration, the usage of each call."""
