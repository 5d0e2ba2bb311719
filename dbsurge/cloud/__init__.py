"""EC2 Spot hosts for Locust workers (`dbsurge runners`): launched, listed, torn down; the user data they boot with and the wheel they install."""
