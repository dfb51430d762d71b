"""Privacy as a simulation axis (docs/how-to/privacy.md): which channels a method's clients send and whether each is
privatised (:mod:`~raysim.privacy.channels`), the Gaussian mechanism's tensor arithmetic
(:mod:`~raysim.privacy.mechanisms`), exact accounting with Google's dp-accounting
(:mod:`~raysim.privacy.accounting`), the noise a run uses (:mod:`~raysim.privacy.calibration`), what the server
sees of a round under user-level DP or secure aggregation (:mod:`~raysim.privacy.cohort_view`), secure
aggregation's costs (:mod:`~raysim.privacy.secure_sum`) and record-level DP-SGD's step
(:mod:`~raysim.privacy.dp_sgd`).

Imports ``base``, ``ops`` and ``core``: the engine and the config use it."""
