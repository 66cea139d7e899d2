"""mmgrpo/trainer"""
