"""tuner.core"""
