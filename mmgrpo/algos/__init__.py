"""mmgrpo/algos"""
