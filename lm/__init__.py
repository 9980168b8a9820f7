"""The tensor language model: schedule sentences, a small transformer, training, decoding."""
