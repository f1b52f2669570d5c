"""Choice: which pools can hold a request, their order (the sort key), and the trace."""
