"""The runs table: its filter form and search box (`forms`) and its page, labels, archiving and
deleting (`views`)."""
