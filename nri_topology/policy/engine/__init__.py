"""Engine: place, release, resize and adopt as transactions over the accounts."""
