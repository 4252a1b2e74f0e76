-- A tiny school, written for nemo_gym's text_to_sql environment (Apache-2.0).
CREATE TABLE students (id INTEGER PRIMARY KEY, name TEXT NOT NULL, year INTEGER NOT NULL);
CREATE TABLE courses (id INTEGER PRIMARY KEY, title TEXT NOT NULL, credits INTEGER NOT NULL, teacher TEXT NOT NULL);
CREATE TABLE enrollments (student_id INTEGER NOT NULL REFERENCES students(id), course_id INTEGER NOT NULL REFERENCES courses(id), grade INTEGER, PRIMARY KEY (student_id, course_id));
INSERT INTO students VALUES (1, 'Ivy', 1), (2, 'Jonah', 2), (3, 'Kai', 2), (4, 'Lena', 3), (5, 'Milo', 1);
INSERT INTO courses VALUES (1, 'Algebra', 4, 'Dr. Reyes'), (2, 'Biology', 3, 'Dr. Singh'), (3, 'History', 2, 'Mr. Cole'), (4, 'Physics', 4, 'Dr. Reyes');
INSERT INTO enrollments VALUES (1, 1, 88), (1, 2, 92), (2, 1, 75), (2, 4, 81), (3, 3, 67), (3, 2, NULL), (4, 4, 95), (4, 1, 90), (5, 3, 72);
