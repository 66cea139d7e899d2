"""mmgrpo/models"""
