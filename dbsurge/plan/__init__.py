"""The plan: stage plans (arrival rates over time), their numbered arrivals, rate overrides and the rows they make, how the user pool grows."""
