"""What several protocol families share: the user's choice of item, values as units and their prefixes,
whole-value reports and their server, what RAPPOR and SFP report, and the keys they read alike."""
