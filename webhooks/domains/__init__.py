"""What events do to the shop: one package (or module) per provider's domain."""
