"""What exports are made of: the in-graph text encoders and taggers.
"""
