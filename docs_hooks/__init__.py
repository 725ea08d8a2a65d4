"""What `mkdocs build` runs besides Markdown (mkdocs.yml `hooks:`): the pages generated from the code
itself, so the reference cannot drift from it. Not part of the product: only the docs build imports it."""
