-- A tiny shop, written for nemo_gym's text_to_sql environment (Apache-2.0).
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL, joined DATE NOT NULL);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL, price REAL NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id), product_id INTEGER NOT NULL REFERENCES products(id), quantity INTEGER NOT NULL, ordered_on DATE NOT NULL);
INSERT INTO customers VALUES (1, 'Ana Lopez', 'Madrid', '2023-02-11'), (2, 'Ben Okafor', 'Lagos', '2023-05-30'), (3, 'Chloe Martin', 'Paris', '2024-01-08'), (4, 'Dev Patel', 'Mumbai', '2022-11-19'), (5, 'Emma Berg', 'Oslo', '2024-03-02'), (6, 'Farid Haddad', 'Paris', '2023-09-14');
INSERT INTO products VALUES (1, 'Espresso machine', 'kitchen', 249.0), (2, 'Kettle', 'kitchen', 35.5), (3, 'Desk lamp', 'office', 42.0), (4, 'Notebook', 'office', 4.5), (5, 'Headphones', 'audio', 89.9), (6, 'Speaker', 'audio', 129.0), (7, 'Mug', 'kitchen', 9.0), (8, 'Tripod', 'office', 27.0);
INSERT INTO orders VALUES (1, 1, 2, 1, '2024-04-01'), (2, 1, 7, 4, '2024-04-01'), (3, 2, 5, 1, '2024-04-03'), (4, 3, 1, 1, '2024-04-07'), (5, 3, 4, 10, '2024-04-07'), (6, 4, 6, 2, '2024-04-09'), (7, 5, 3, 1, '2024-04-12'), (8, 6, 7, 2, '2024-04-15'), (9, 6, 5, 1, '2024-04-15'), (10, 2, 4, 3, '2024-04-20');
