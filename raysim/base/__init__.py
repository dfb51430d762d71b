"""What every layer may use and that imports nothing of raysim's but each other: errors, seeds, the settings
declaration (config keys and method options), named registries, numeric precision, preprocessing, prompt choices,
paths a run writes, memory trimming, Ray's start and stop signals."""
