"""Measuring a device (`tuner profile`): operator times at a model's shapes, host<->device copy
curves, CPU ops vs threads, (de)quantization kernels. torch is imported only inside the
functions that measure (profilers.profile.run_profile), never at import."""
