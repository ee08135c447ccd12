"""Running placed graphs on real devices: measurement, CPU worker clusters, calibration."""
