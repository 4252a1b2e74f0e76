"""Other libraries' data and environments, run by nemo_gym (`interop.nemo_gym`: NeMo Gym)."""
