"""Running a plan: engines asked, records appended, controls, resuming."""
