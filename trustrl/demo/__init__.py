"""`trustrl demo`: the chapter's interactive demos and a live run dashboard, in the browser.

A standard-library HTTP server (server.py) serves hand-written pages from static/ (no CDN, no
framework): the clip explorer, the K-epoch bandit demo, natural vs plain gradient on the
one-parameter policy, and a dashboard that reads the run folders `trustrl train` writes. The
demos compute in the browser (static/kepoch_sim.js is a line-by-line port of
trustrl/experiments/kepoch.py); the /api/kepoch, /api/clip and /api/natural endpoints return
trustrl's own Python numbers for the same settings, which the pages and the tests compare with.
"""
