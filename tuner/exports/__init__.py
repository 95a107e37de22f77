"""tuner.exports"""
