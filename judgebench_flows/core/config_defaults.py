"""Where the benchmark comes from by default: the public JudgeBench repository at a pinned commit."""

DEFAULT_REPO_URL = "https://github.com/ScalerLab/JudgeBench.git"
# The JudgeBench commit whose data and prompts this package was validated against.
DEFAULT_REF = "e2c52c284e735e139b3daa61c206ee208f36c461"
