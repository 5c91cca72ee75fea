"""The protocols around the model: question detection, the scripted user, effect hints, answers read back from confirm logs."""
