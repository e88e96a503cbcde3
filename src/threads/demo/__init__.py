"""``threads demo``: a support agent whose worker is killed mid-run, recovered, parked on an
in-doubt email, resolved by an operator, and finished, with a fake payments/mail service
proving nothing was applied twice."""
