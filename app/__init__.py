"""The specviz dashboard (Streamlit): ``streamlit run app/main.py``.

A package, so that the entry script and every page import their shared modules as ``app.<module>`` and never
edit the import path: the editable install (``pip install -e .``) maps ``app`` to this folder, and under
``python -m streamlit`` or pytest the project root (the working directory) is searched as well.
``streamlit run`` also puts this folder itself first on the import path; nothing in it is named ``app``, so
``import app`` still finds this package.
"""
