"""`minitc explore`: a local compiler-explorer page for schedules. server.py serves the page
(static/) and a JSON API on 127.0.0.1; sandbox.py and zygote.py run the code typed into the page
in child processes with a time limit and a memory cap; worker.py and measure.py are what those
children do; ops.py and schedule_code.py write the code the page starts from. docs/explore.md
describes the page."""
