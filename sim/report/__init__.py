"""Self-contained HTML reports (Plotly): timelines, memory over the step, summary tables."""
