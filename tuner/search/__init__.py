"""tuner.search"""
