"""Reading runs back: the docs' matrices and studies, pages, plots, diffs, advice; importing published tables."""
