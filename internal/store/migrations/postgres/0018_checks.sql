-- Check runs (issue 16): why a run's report to its forge fell back — GitHub
-- refused its check run (no checks: write, or invalid) and kiln posted a
-- commit status instead — shown with the run. '' when nothing went wrong.
ALTER TABLE runs ADD COLUMN report_note TEXT NOT NULL DEFAULT '';
