-- The first round's schema (version 1, no version table), as its SQLAlchemy model compiled it: for migration tests.
CREATE TABLE runs (
	id INTEGER NOT NULL, 
	name VARCHAR(200) NOT NULL, 
	hardware VARCHAR(200) NOT NULL, 
	provenance VARCHAR(20) NOT NULL, 
	source TEXT, 
	device VARCHAR(50), 
	environment JSON NOT NULL, 
	config JSON NOT NULL, 
	started_at DATETIME NOT NULL, 
	finished_at DATETIME, 
	PRIMARY KEY (id), 
	UNIQUE (name, hardware, provenance)
);

CREATE TABLE cells (
	id INTEGER NOT NULL, 
	run_id INTEGER NOT NULL, 
	cell_key VARCHAR(64) NOT NULL, 
	family VARCHAR(100) NOT NULL, 
	preset VARCHAR(100) NOT NULL, 
	mode VARCHAR(100) NOT NULL, 
	backend VARCHAR(30), 
	interval INTEGER, 
	stride INTEGER, 
	offload_attention BOOLEAN, 
	quantization VARCHAR(50) NOT NULL, 
	training VARCHAR(20), 
	tokens INTEGER, 
	status VARCHAR(20) NOT NULL, 
	reason TEXT, 
	traceback TEXT, 
	sec_per_step FLOAT, 
	mean_s FLOAT, 
	iqr_s FLOAT, 
	peak_bytes INTEGER, 
	peak_reserved_bytes INTEGER, 
	first_step_peak_bytes INTEGER, 
	alloc_retries INTEGER, 
	host_offload_peak_bytes INTEGER, 
	breakdown JSON, 
	weight_bytes INTEGER, 
	device_name VARCHAR(200), 
	host VARCHAR(200), 
	worker JSON, 
	wall_s FLOAT, 
	report JSON, 
	"plan" JSON, 
	config JSON NOT NULL, 
	recorded_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	UNIQUE (run_id, cell_key), 
	FOREIGN KEY(run_id) REFERENCES runs (id)
);

CREATE INDEX ix_cells_run_id ON cells (run_id);

CREATE TABLE samples (
	id INTEGER NOT NULL, 
	cell_id INTEGER NOT NULL, 
	step INTEGER NOT NULL, 
	seconds FLOAT NOT NULL, 
	warmup BOOLEAN NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(cell_id) REFERENCES cells (id)
);

CREATE INDEX ix_samples_cell_id ON samples (cell_id);
