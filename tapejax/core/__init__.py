"""The core: Tensor, Variable, dtypes, the op entry point (``bind``) and the execution seam
(``executor``); see README.md.  No public names here: ``tapejax`` re-exports them."""
