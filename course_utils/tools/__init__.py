"""The maintainers' and instructors' tools, apart from the helpers a learner imports: the build that stamps the
notebooks (``build``), the benchmark (``benchmark``), the website and its slides (``site``), the notebook runner
the grader and the benchmark share (``notebook_runner``), and where the course's checkout is (``checkout``).
``python3 course.py build|bench|site`` runs them; none imports TensorFlow at start."""
