"""Deal-or-NoDeal (Lewis et al. 2017): split books, hats and balls valued privately by two sides."""
