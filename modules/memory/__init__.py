"""Advanced memory management: MemWatch, transaction memory, bounded work pools."""
