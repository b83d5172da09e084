"""What the framework publishes for consumers in other languages, kept beside the code that reads it."""
