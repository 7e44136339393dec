"""Result sets out: load, classify (A/B, model vs broker, goals), render (HTML, plots, summary.json and
its schema)."""
