"""Differential operators as Spark transformations of update DataFrames.

An update DataFrame has the data columns, ``_time`` (and ``_time1``… inside
loops) and ``_diff``. Each function here maps the updates of its inputs in one
interval of times ``[lower, upper)`` to the updates of its output in the same
interval, reading history from arrangements where it needs it.
"""
