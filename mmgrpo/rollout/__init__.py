"""mmgrpo/rollout"""
