"""The physicians' personal data: where it is (`locate`), erasing one person everywhere (`erase`), the
suppression list that keeps them out afterwards (`suppression`), and retention (`retention`)."""
