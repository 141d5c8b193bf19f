"""The published static site: built from a history store, readable without JavaScript, from file://."""
