"""The typed contracts between the stages: snapshot (sampler -> evaluator), view
(evaluator -> views), statuses."""
