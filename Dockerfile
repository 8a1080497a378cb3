# Placeholder until the packaging issue: see README.
FROM python:3.11-slim
