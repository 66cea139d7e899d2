"""data_recipes"""
