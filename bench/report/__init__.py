"""Reports rendered from results files alone (no TensorFlow): console, Markdown, HTML."""
