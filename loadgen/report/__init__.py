"""``dynbranch report``: ``runner`` runs the matrix (``matrix``) and writes the report;
``arguments`` holds its flags and help; ``progress`` its progress bar; ``summary``, ``plots``,
``numbers`` and ``provenance`` what it writes; ``c3``, ``phased``, ``timeline`` and
``decision_record`` the studies and records it adds.
"""
